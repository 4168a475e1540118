"""The head's indexes, found missing and created again (docs/migrations.md#missing-indexes).

A database at head can still lack an index the models declare: dropped by hand, by a tool,
or by an older release of the rest of opensquilla rebuilding a table in the same file.
Nothing then fails; every read that needs the index just scans. ``connect()`` recreates the
missing non-unique ones (pure access paths: creating one changes no row and cannot fail on
the data); a missing *unique* index is a constraint, which existing duplicates would make
fail, so only ``opensquilla-session db check --repair`` creates it, and reports a refusal.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .base import Base
from .tables import OUR_TABLES
from .version_table import schema_of


def declared_indexes(*, unique: bool) -> list[sa.Index]:
    """The indexes the models declare on our tables (the unique ones too, if ``unique``)."""
    return sorted(
        (
            index
            for table in Base.metadata.sorted_tables
            if table.name in OUR_TABLES
            for index in table.indexes
            if unique or not index.unique
        ),
        key=lambda index: str(index.name),
    )


def existing_index_names(connection: Connection) -> set[str]:
    """The names of the indexes the database holds in the store's schema (one query)."""
    if connection.dialect.name == "postgresql":
        schema = schema_of(connection)
        query = sa.text(
            "SELECT indexname FROM pg_indexes"
            " WHERE schemaname = coalesce(:schema, current_schema())"
        )
        return set(connection.execute(query, {"schema": schema}).scalars())
    query = sa.text("SELECT name FROM sqlite_master WHERE type = 'index'")
    return set(connection.execute(query).scalars())


def missing_indexes(connection: Connection, *, unique: bool) -> list[sa.Index]:
    present = existing_index_names(connection)
    return [index for index in declared_indexes(unique=unique) if index.name not in present]


def create_indexes(connection: Connection, names: list[str]) -> list[str]:
    """Create those of ``names`` still missing (re-checked here, under the migration lock);
    the names created. On PostgreSQL, where the lock's connection has no transaction open,
    the creation is committed here."""
    wanted = set(names)
    created = []
    for index in missing_indexes(connection, unique=True):
        if index.name in wanted:
            index.create(connection, checkfirst=True)
            created.append(str(index.name))
    if connection.dialect.name == "postgresql" and connection.in_transaction():
        connection.commit()
    return created
