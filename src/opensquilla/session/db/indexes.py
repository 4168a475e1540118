"""The head's indexes: found missing, and created again on request
(docs/migrations.md#missing-indexes).

A database at head can still lack an index the models declare: dropped by hand, by a tool,
by an older release of the rest of opensquilla rebuilding a table in the same file, or left
*invalid* on PostgreSQL by a ``CREATE INDEX CONCURRENTLY`` that failed (such an index is in
the catalog but no read uses it, so it counts as missing). Nothing then fails; every read
that needs the index just scans.

``connect()`` only detects them (:func:`missing_index_names`, one catalog query) and logs a
warning; it never builds one: on a live PostgreSQL a plain ``CREATE INDEX`` holds a lock that
blocks every writer of the table for the whole build, and an application role need not own
the tables. ``opensquilla-session db check --repair`` builds them (:func:`create_missing`):
on PostgreSQL one ``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` per index in autocommit (writers
keep writing), an invalid leftover first dropped with ``DROP INDEX CONCURRENTLY``; on SQLite a
plain ``CREATE INDEX IF NOT EXISTS`` each, in the caller's one transaction.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex, DropIndex
from sqlalchemy.sql.compiler import DDLCompiler

from .base import Base
from .layout import PARTITIONED_SESSION_ID_INDEX, SESSION_ID_INDEX
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


def index_validity(connection: Connection) -> dict[str, bool]:
    """Every index the database holds in the store's schema, by name: whether it is valid
    (one catalog query; on SQLite every index is)."""
    if connection.dialect.name == "postgresql":
        query = sa.text(
            "SELECT c.relname, i.indisvalid FROM pg_catalog.pg_index i"
            " JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = coalesce(:schema, current_schema())"
        )
        rows = connection.execute(query, {"schema": schema_of(connection)})
        return {str(name): bool(valid) for name, valid in rows}
    query = sa.text("SELECT name FROM sqlite_master WHERE type = 'index'")
    return dict.fromkeys(connection.execute(query).scalars(), True)


def existing_index_names(connection: Connection) -> set[str]:
    """The names of the valid indexes the database holds in the store's schema."""
    return {name for name, valid in index_validity(connection).items() if valid}


def missing_index_names(connection: Connection) -> list[str]:
    """The declared indexes (unique ones included) the database lacks or holds invalid."""
    present = existing_index_names(connection)
    if PARTITIONED_SESSION_ID_INDEX in present:  # its stand-in on a partitioned database
        present.add(SESSION_ID_INDEX)
    return [str(index.name) for index in declared_indexes(unique=True) if index.name not in present]


def invalid_index_names(connection: Connection) -> list[str]:
    """The declared indexes the database holds but cannot use (PostgreSQL: ``indisvalid``
    false, a failed concurrent build's leftover)."""
    invalid = {name for name, valid in index_validity(connection).items() if not valid}
    return [str(index.name) for index in declared_indexes(unique=True) if index.name in invalid]


class _CreateIndexConcurrently(CreateIndex):
    inherit_cache = False


class _DropIndexConcurrently(DropIndex):
    inherit_cache = False


@compiles(_CreateIndexConcurrently, "postgresql")
def _create_concurrently(element: CreateIndex, compiler: DDLCompiler, **kw: Any) -> str:
    text = compiler.process(CreateIndex(element.element, if_not_exists=element.if_not_exists), **kw)
    done, count = re.subn(r"^CREATE (UNIQUE )?INDEX ", r"CREATE \1INDEX CONCURRENTLY ", text)
    assert count == 1, text
    return done


@compiles(_DropIndexConcurrently, "postgresql")
def _drop_concurrently(element: DropIndex, compiler: DDLCompiler, **kw: Any) -> str:
    text = compiler.process(DropIndex(element.element, if_exists=element.if_exists), **kw)
    done, count = re.subn(r"^\s*DROP INDEX ", "DROP INDEX CONCURRENTLY ", text)
    assert count == 1, text
    return done


def create_missing(connection: Connection) -> list[str]:
    """Create the declared indexes the database lacks (re-read here: the caller holds the
    migration lock); the names created. Non-unique ones first, so that the access paths are
    back even when duplicates refuse a unique one.

    PostgreSQL: the connection must have no transaction open; each index is built on its own
    in autocommit, ``CONCURRENTLY`` (an invalid leftover dropped first), so a failure leaves
    those before it built and, its leftover dropped again, nothing of its own. SQLite: plain
    ``CREATE INDEX IF NOT EXISTS`` in the caller's transaction (all or none)."""
    missing = set(missing_index_names(connection))
    wanted = [
        index
        for index in sorted(declared_indexes(unique=True), key=lambda index: bool(index.unique))
        if index.name in missing
    ]
    if connection.dialect.name != "postgresql":
        for index in wanted:
            connection.execute(CreateIndex(index, if_not_exists=True))
        return [str(index.name) for index in wanted]
    invalid = set(invalid_index_names(connection))
    isolation = connection.get_isolation_level()
    connection.commit()  # isolation_level may only change outside a transaction
    connection.execution_options(isolation_level="AUTOCOMMIT")
    try:
        created = []
        for index in wanted:
            if index.name in invalid:
                connection.execute(_DropIndexConcurrently(index, if_exists=True))
            try:
                connection.execute(_CreateIndexConcurrently(index, if_not_exists=True))
            except Exception:
                # A failed concurrent build leaves an invalid index behind: drop it again
                # (best effort: the build's own error is the one raised).
                with contextlib.suppress(Exception):
                    connection.execute(_DropIndexConcurrently(index, if_exists=True))
                raise
            created.append(str(index.name))
        return created
    finally:
        # Autocommit: SQLAlchemy's transaction object is a marker only, nothing to undo.
        connection.rollback()
        connection.execution_options(isolation_level=isolation)
